//! `capability!`: one capability of a store (a trait of related operations) declared together
//! with its layer twin, so that an operation is written once.
//!
//! For `pub trait X, layer XLayer { ... }` it declares
//! - `trait X`: the operations as a backend implements them; a `required` one has no default;
//! - `trait XLayer: Layer<Below: X>`: the same operations for a store over another one
//!   (`crate::store::layers::Layer`). A `required` or `provided` operation forwards to the same
//!   call on `inner()`; a `derived` one keeps the default of `X`, which is made of the store's
//!   own other operations, so a layer that changes those is never bypassed by it;
//! - `impl<L: XLayer> X for L`, routing every operation through `XLayer`.
//!
//! A layer implements `XLayer` and writes only the operations it changes; a new operation is
//! written in the capability and in the layers that change it, nowhere else. Defaults call
//! sibling operations as `Self::op(self, ..)`: in a layer `self.op(..)` would be ambiguous
//! between `X` and `XLayer`.
//!
//! The method grammar: attributes, then `required`, `provided` or `derived`, then an `async
//! fn` (no generics; async_trait boxes it) or a plain `fn` (lifetime parameters allowed),
//! `&self` first, and `;` for a required one or its default body.

macro_rules! capability {
    (
        $(#[$doc:meta])*
        pub trait $cap:ident $(: $sup:path)?, layer $layer:ident { $($ops:tt)* }
    ) => {
        $crate::store::capability::capability!(
            @op ($(#[$doc])*) ($($sup)?) $cap $layer [] [] [] $($ops)*
        );
    };

    // All operations read: the three items.
    (@op ($($doc:tt)*) ($($sup:path)?) $cap:ident $layer:ident
        [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]) => {
        $($doc)*
        #[async_trait::async_trait]
        pub trait $cap: $($sup +)? Send + Sync + 'static { $($own)* }

        #[doc = concat!("`", stringify!($cap), "` for a store over another one: each operation")]
        /// forwards to `inner()` unless the layer writes it (see `crate::store::capability`).
        #[async_trait::async_trait]
        pub trait $layer: $crate::store::layers::Layer<Below: $cap> $(+ $sup)? { $($fwd)* }

        #[async_trait::async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<L: $layer> $cap for L { $($route)* }
    };

    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        $(#[$m:meta])* required async fn $name:ident(&$self:ident $(, $a:ident: $t:ty)* $(,)?)
            $(-> $ret:ty)?; $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])* async fn $name(&$self $(, $a: $t)*) $(-> $ret)?;]
            [$($fwd)* async fn $name(&$self $(, $a: $t)*) $(-> $ret)? {
                $self.inner().$name($($a),*).await
            }]
            [$($route)* async fn $name(&$self $(, $a: $t)*) $(-> $ret)? {
                <L as $layer>::$name($self $(, $a)*).await
            }]
            $($rest)*);
    };
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        $(#[$m:meta])* provided async fn $name:ident(&$self:ident $(, $a:ident: $t:ty)* $(,)?)
            $(-> $ret:ty)? $body:block $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])* async fn $name(&$self $(, $a: $t)*) $(-> $ret)? $body]
            [$($fwd)* async fn $name(&$self $(, $a: $t)*) $(-> $ret)? {
                $self.inner().$name($($a),*).await
            }]
            [$($route)* async fn $name(&$self $(, $a: $t)*) $(-> $ret)? {
                <L as $layer>::$name($self $(, $a)*).await
            }]
            $($rest)*);
    };
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        $(#[$m:meta])* derived async fn $name:ident(&$self:ident $(, $a:ident: $t:ty)* $(,)?)
            $(-> $ret:ty)? $body:block $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])* async fn $name(&$self $(, $a: $t)*) $(-> $ret)? $body]
            [$($fwd)* async fn $name(&$self $(, $a: $t)*) $(-> $ret)? $body]
            [$($route)* async fn $name(&$self $(, $a: $t)*) $(-> $ret)? {
                <L as $layer>::$name($self $(, $a)*).await
            }]
            $($rest)*);
    };
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        $(#[$m:meta])* required fn $name:ident $(<$lt:lifetime>)?
            (&$($slt:lifetime)? $self:ident $(, $a:ident: $t:ty)* $(,)?) $(-> $ret:ty)?;
            $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)?;]
            [$($fwd)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                $self.inner().$name($($a),*)
            }]
            [$($route)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                <L as $layer>::$name($self $(, $a)*)
            }]
            $($rest)*);
    };
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        $(#[$m:meta])* provided fn $name:ident $(<$lt:lifetime>)?
            (&$($slt:lifetime)? $self:ident $(, $a:ident: $t:ty)* $(,)?) $(-> $ret:ty)? $body:block
            $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? $body]
            [$($fwd)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                $self.inner().$name($($a),*)
            }]
            [$($route)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                <L as $layer>::$name($self $(, $a)*)
            }]
            $($rest)*);
    };
    (@op $doc:tt $sup:tt $cap:ident $layer:ident [$($own:tt)*] [$($fwd:tt)*] [$($route:tt)*]
        $(#[$m:meta])* derived fn $name:ident $(<$lt:lifetime>)?
            (&$($slt:lifetime)? $self:ident $(, $a:ident: $t:ty)* $(,)?) $(-> $ret:ty)? $body:block
            $($rest:tt)*) => {
        $crate::store::capability::capability!(@op $doc $sup $cap $layer
            [$($own)* $(#[$m])* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? $body]
            [$($fwd)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? $body]
            [$($route)* fn $name $(<$lt>)? (&$($slt)? $self $(, $a: $t)*) $(-> $ret)? {
                <L as $layer>::$name($self $(, $a)*)
            }]
            $($rest)*);
    };
}

pub(crate) use capability;
